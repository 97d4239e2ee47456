package agentmetrics_test

import (
	"log"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/agentmetrics"
	"github.com/allot/allot/agent/domain"
)

// A service registers its agent's collector, and its domain client's if
// it has one, next to its own metrics and serves them on /metrics.
func Example() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	a, err := agent.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	d, err := domain.New(a)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(agentmetrics.New(a), agentmetrics.NewDomain(d))
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", nil))
}
