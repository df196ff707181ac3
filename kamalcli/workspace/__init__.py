"""Where things are and what is recorded: the workspace folder, kamal.toml, the SQLite database, runs."""
