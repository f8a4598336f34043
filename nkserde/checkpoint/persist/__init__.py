"""A checkpoint written and read back: the save path (saving.py, with its
background write, background_write.py), the resume (restore.py: which
checkpoint, and how it is put back) and the loggers' histories in the
directory's history log (logger_histories.py)."""
