"""The dashboard: a small read-only web app over a study database (`autotune dashboard`).

`app` holds the routes (the only module that imports the web framework,
Starlette, served by uvicorn); `render` the jinja2 templates and the filters
that format figures, shared with `autotune report`. Pages lay out what
`autotune.results.view` computes and never compute a figure themselves. Every
route answers GET (and HEAD) only; nothing here writes to the database. Its
assets, plotly.js included, are served from the installed packages, so it
works on a cluster with no internet.
"""
