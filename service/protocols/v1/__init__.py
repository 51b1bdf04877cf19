"""/v1: the JSON API. One module per endpoint (its route and view), the worked examples, and the JSON body's
way to the typed request (parsing.py)."""
