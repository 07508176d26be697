package lease

// SetRenewBatchSize makes the renewer put at most n leases in one
// statement, so a test can exercise many parallel batches with few leases;
// the returned func restores MaxBatch. Tests in this package do not run in
// parallel, and the caller closes its Managers before restoring.
func SetRenewBatchSize(n int) (restore func()) {
	renewBatchSize.Store(int64(n))
	return func() { renewBatchSize.Store(MaxBatch) }
}
