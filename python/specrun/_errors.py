class ResultFileError(ValueError):
    """A file that is not a result file this package reads, or whose records break an identity.
    The message names the file and the dataset, attribute or identity."""
