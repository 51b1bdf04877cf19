# The attention service as a small non-root image: `attention-service serve` (gunicorn with the package's settings).
# Build: docker build -t attention-service .   Run: docker run -p 127.0.0.1:8000:8000 attention-service

# --- build: the locked dependencies in a virtual environment, without pip inside it ---------------------
FROM python:3.11-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
COPY requirements.lock /tmp/requirements.lock
# pip compiles the .pyc files as it installs: the root filesystem is read-only at run time, and
# compiling numpy & co. on every start would slow the first answer. Test suites are not shipped.
RUN python -m venv --without-pip /opt/venv \
    && pip --python /opt/venv/bin/python install --no-cache-dir -r /tmp/requirements.lock \
    && find /opt/venv/lib -depth -type d -name tests -path '*/numpy/*' -exec rm -rf {} +
# Then the package, as `pip install .` installs it anywhere: its files, its gunicorn settings and the
# `attention-service` console script (the dependencies are the locked ones above).
COPY pyproject.toml README.md LICENSE /tmp/src/
COPY service /tmp/src/service
RUN pip --python /opt/venv/bin/python install --no-cache-dir --no-deps /tmp/src

# --- runtime ---------------------------------------------------------------------------------------------
FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    HOST=0.0.0.0 \
    PORT=8000
RUN groupadd --system --gid 10001 app \
    && useradd --system --no-log-init --uid 10001 --gid app --no-create-home --shell /usr/sbin/nologin app
COPY --from=build /opt/venv /opt/venv
USER 10001:10001
EXPOSE 8000
# No curl in the image: the standard library asks /readyz (a real, tiny computation).
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('PORT', '8000'), timeout=2)"]
CMD ["attention-service", "serve"]
