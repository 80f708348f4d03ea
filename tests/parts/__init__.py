"""The real parts the scale-out tests start (issue 33): each in a module of its own, each on a
free 127.0.0.1 port in a temporary directory, stopped by its PID whatever happened.

`system.need` installs the Debian packages a part needs (redis-server, haproxy) when they
are missing, as the container test installs podman: `make test` on a fresh machine has them.
"""
