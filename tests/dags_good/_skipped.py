raise RuntimeError("files starting with _ must not be imported")
