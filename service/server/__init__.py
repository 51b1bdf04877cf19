"""The HTTP server around the app: gunicorn's gevent worker with admission at the connection level."""
