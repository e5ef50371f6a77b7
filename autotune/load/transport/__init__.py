"""The load generator's wire: one HTTP/1.1 client for streamed requests, its timestamps, its stream parser.

- ``http``: a minimal HTTP/1.1 keep-alive client for the streamed requests of a load point.
- ``arrival``: a plain-TCP transport that stamps each read with the time its bytes arrived.
- ``stream``: streamed responses parsed incrementally (SSE events split by hand, one JSON parse each).
"""
