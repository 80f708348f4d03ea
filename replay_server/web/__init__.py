"""The web layer: the HTTP app and its routes, how servers listen (sockets, uvicorn,
slow clients, workers), and the recording proxy. The only folder that imports the web
stack (fastapi, starlette, uvicorn)."""
