"""One declaration of each request, which both codecs load through: its marshmallow schema (fields, ranges,
allowed values, null-as-absent, unknown fields), whose ``post_load`` makes the typed request.

/v1 loads a JSON body through it; /v2 loads its request parameters through the same fields (and builds the
same typed request from its tensors). The response schemas beside them document /v1's answers. Neither
codec is imported here, so the two can share this without importing each other.
"""
