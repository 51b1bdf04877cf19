"""HTTP endpoints: thin views that validate with a schema, call a kernel and return its result."""
