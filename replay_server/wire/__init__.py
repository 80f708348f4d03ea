"""Wire formats and matching: what a request to each API family looks like, what in it is
the key, and the bodies and streams each family answers with. Pure functions of JSON and
bytes: nothing here knows about files, the index or HTTP."""
