package natstest

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// ConfigServer starts a server from the config file as a deployment
// would (server.ProcessConfigFile), with the environment variables env
// set for the test (the file's $VARs), and stops it when the test ends.
// log, if not nil, receives the server's log, debug lines included;
// otherwise the server logs nothing.
func ConfigServer(tb testing.TB, file string, env map[string]string, log server.Logger) *server.Server {
	tb.Helper()
	for k, v := range env {
		tb.Setenv(k, v)
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		tb.Fatalf("%s: %v", file, err)
	}
	opts.NoSigs = true
	s, err := server.NewServer(opts)
	if err != nil {
		tb.Fatalf("%s: %v", file, err)
	}
	if log != nil {
		s.SetLoggerV2(log, true, false, false)
	}
	go s.Start()
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(ReadyWait) {
		tb.Fatalf("%s: server not ready for connections", file)
	}
	return s
}
