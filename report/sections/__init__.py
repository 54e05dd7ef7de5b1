"""One module per report section; each turns the fetched frames into a `Section`."""
