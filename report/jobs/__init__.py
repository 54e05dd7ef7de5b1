"""One job's use of what it held: `nvwatch job`, its store past retention, its notes."""
