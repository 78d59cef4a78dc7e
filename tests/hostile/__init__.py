"""The hostile-input run: a generator of bad inputs of every kind broker reads from a
user (`cases`), a driver that runs broker commands over them (`driver`), and the test
that checks every command answers with one line, an exit code, and no change
(`test_hostile_inputs`)."""
