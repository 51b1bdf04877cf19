"""The HTTP server around the app: gunicorn's gevent worker with admission at the connection level."""

# What the command line (cli.py) and the application it runs (application.py) share.
SETTINGS_MODULE = "service.server.gunicorn_settings"
DEFAULT_APP = "service:create_app()"
PROG = "attention-service"
