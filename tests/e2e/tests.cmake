# End-to-end script tests. One line per script.
