"""``mechprobe report``: building, comparing, storing and rendering the report (Markdown, HTML, figures, views)."""
