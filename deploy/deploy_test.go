package deploy

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestNATSConfigsParse loads every NATS config with the server's own parser.
func TestNATSConfigsParse(t *testing.T) {
	for k, v := range map[string]string{"SERVER_NAME": "n-1", "REGION": "eu", "CLUSTER": "eu-1"} {
		t.Setenv(k, v)
	}
	files, err := filepath.Glob("nats/*.conf")
	if err != nil || len(files) < 4 {
		t.Fatalf("configs: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			opts, err := server.ProcessConfigFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !opts.JetStream {
				t.Fatal("JetStream is off")
			}
		})
	}
}
