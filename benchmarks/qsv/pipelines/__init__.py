"""The QSV study's pipelines, moved from the package (issue 52)."""
