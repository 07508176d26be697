package natsguard

import "github.com/nats-io/nats.go/jetstream"

// jetstreamKV is a bucket config keeping history records per key.
func jetstreamKV(history uint8) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{History: history}
}
