"""Job manifests: `broker/v1` YAML documents read into `broker.spec.JobSpec`.

`broker.manifest.load` finds, reads and checks manifest files (every error
located as file:line:column: field); `broker.manifest.model` is the pydantic
model of one document, built from its sections (`broker.manifest.sections`) and
the values written as text in them (`broker.manifest.values`), all imported only
when a manifest is read. The reference for users is docs/manifest.md.
"""
