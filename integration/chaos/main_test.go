package chaos

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if IsChild() {
		os.Exit(ChildMain())
	}
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of HTTP transports (minio clients,
		// httptest) are closed lazily by net/http.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
