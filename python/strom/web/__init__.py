"""strom's HTTP server (``pip install 'strom[web]'``): the interactive-query
endpoint (strom.web.iq) and the live web view (strom.web.ui), served by
uvicorn in a background thread of the app (strom.web.server)."""
