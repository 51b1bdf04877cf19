"""The protocol codecs: /v1 (the JSON API) and /v2 (the Open Inference Protocol), each in a room of its own,
both loading through the one declaration of each request in :mod:`service.protocols.declarations`."""
