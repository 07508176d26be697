// Package ha runs fencekit against a real Patroni cluster: etcd and two
// Patroni nodes (PostgreSQL 15) from Debian's packages, started on loopback
// ports with their data under a private directory (scripts/install-ha.sh
// installs the packages when missing), and clients on a multi-host URL with
// target_session_attrs=read-write. The guards' marks live on the shared test
// server, a database that survives the cluster's failovers, and are the
// Managers' floor source (lease.Config.Floor).
//
// Cases: a postmaster crash (Patroni restarts the node and promotes it
// again: a new timeline on the same node), a planned switchover, and the
// loss of the leader with failover, asynchronous and in synchronous_mode.
// Each measures the time from the moment the new primary accepts writes
// to the first grant, the grants refused meanwhile, the tokens issued twice
// and the writes accepted under such a token, and logs them (go test -v);
// docs/operations.md records the figures.
//
// Everything the harness starts is stopped, and its directory removed, when
// the test ends, even when it fails (process groups are killed; Sweep
// removes what a crashed run left). Under CI=true a missing tool fails the
// test; elsewhere it is skipped.
package ha
