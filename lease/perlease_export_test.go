package lease

// SetRenewBatchSize makes m's renewer put at most n leases in one
// statement, so a test can exercise many parallel batches with few leases.
func SetRenewBatchSize(m *Manager, n int) {
	m.renewBatch.Store(int64(n))
}
