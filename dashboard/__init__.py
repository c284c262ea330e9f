"""The operator's web dashboard at /ui: sessions, sign-in, JSON API, live events, static assets."""
