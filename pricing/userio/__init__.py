"""What every room needs to read what a user wrote, and to write files of its own.

It lives in the bottom room so that `pricing`, `providers`, `onprem` and `broker`
can all import it; it imports nothing else of ours. Each module has one job:

- `reading`: the one reader of a user's file (regular files only, size caps from the
  settings, strict UTF-8 with a located error, gzip inflated within the cap, JSON).
- `bounds`: the sane bounds of every number a user writes (prices, counts, hours).
- `redact`: the one redaction of secrets, and URIs without their user part.
- `errors`: `UserInputError` (`file:line:col: field: message`) and `format_field`.
- `suggest`: "did you mean" for unknown names (GPUs, regions, fields, clouds).
- `yaml_reader`: a user's YAML file read safely into located documents (`YamlDocument`):
  nesting depth, alias bombs and lone surrogate escapes refused where they are.
- `locate`: where a field path (`("pools", 0, "gpu")`) is in a YAML node tree.
- `validation`: a pydantic `ValidationError` as located errors, with did-you-mean.
- `settings`: the one configuration resolution (flag > `BROKER_*` environment >
  `./broker.toml` > user `config.toml` > default) and the table of every setting.
- `dirs`: the user's config, data, cache and state directories (XDG).
- `atomic`: replacing a file all or nothing (temporary file beside it, `os.replace`).

Importing any of them is cheap: yaml and pydantic are imported inside the functions
that need them, and `dirs` imports nothing but `os` (the cached `broker --help` uses it).
"""
