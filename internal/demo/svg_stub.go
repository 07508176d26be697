package demo

// WriteSVGFile is replaced by the real renderer.
func WriteSVGFile(path string, res *Result) error { return nil }
