"""Reports of a run: the text table and takeaways, the HTML page, notifications."""
