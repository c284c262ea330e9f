"""OAuth 2.1 authorization server for remote MCP clients (Claude.ai connectors), with operator consent."""
