#!/bin/sh
# Answers the bridge's sysconfig query like a Python built without --enable-shared.
echo '{"shared": false, "library": null, "executable": "/opt/static/bin/python3", "path": [], "version": "3.12.0"}'
