"""Wire formats and matching: what a request to each API family looks like, what in it is
the key, and the bodies and streams each family answers with. Pure functions of JSON and
bytes: nothing here knows about files, the index or HTTP.

    families.py   the registry: endpoint path -> Family (family.py), all the rest calls;
                  it imports each family's package by name, and nothing else does
    chat/ completions/ responses/ messages/
                  one package a family, of one shape: fields.py (its field table and its
                  own normal forms), request.py (checks, keyed prompts), answer.py (what
                  a usable saved exchange is, what makes two generations the same),
                  stream_out.py, stream_in.py; chat and completions share choices/ (their
                  common fields, saved choices, reply bodies, stream framing and
                  aggregation)
    keys.py       the field-table engine: Field, Table, the normal forms, canonical JSON,
                  the key and its one KEY_VERSION
    answer.py     what the families' saved-answer checks share (BadAnswer, want), and a
                  generation's identity
    sse.py        the one SSE frame cutter; pieces.py texts cut into token-sized deltas
    selection.py  the saved exchanges a reply is made from; difference.py where a miss
                  first differs; json_types.py JSON type names; models.py GET /v1/models
                  (vLLM's list)
"""
