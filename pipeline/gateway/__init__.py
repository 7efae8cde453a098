"""The gateway: HTTP, WebSocket and OpenAI-compatible access to the pipeline (docs/gateway.md).
`app.create_app` builds the app; `config.GatewayConfig` is what it serves with. The package
itself imports neither, so reading the gateway's settings does not load the web stack."""
