package metrics_test

import (
	"context"
	"log"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/metrics"
)

// A program that runs a coordinator itself registers its collector and
// serves /metrics (`allot coordinator --metrics-addr` does this for you).
func Example() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	c, err := coordinator.New(nc, coordinator.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer c.Stop()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCoordinatorCollector(func() []metrics.Target { return []metrics.Target{c} }, metrics.Options{}))
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log.Fatal(http.ListenAndServe("127.0.0.1:9464", nil))
}
