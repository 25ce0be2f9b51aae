raise RuntimeError("folders starting with . must not be searched")
