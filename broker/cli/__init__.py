"""The command line: one module per noun; only this package formats for humans."""
