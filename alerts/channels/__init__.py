"""Notification channels: message formats per kind and the outbox sender that delivers them."""
