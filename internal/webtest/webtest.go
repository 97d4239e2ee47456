// Package webtest sends the HTTP requests of allot's tests of its web
// endpoints (the dashboard, metrics): with a chosen Host header and
// headers, following no redirect, so that a test sees what a browser or
// a script would be answered.
package webtest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Get sends GET url with the Host header host (the URL's own if empty)
// and the headers hdr, each "Name: value", follows no redirect, and
// returns the response (its body read and closed) and the body.
func Get(tb testing.TB, url, host string, hdr ...string) (*http.Response, string) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for _, h := range hdr {
		name, value, _ := strings.Cut(h, ": ")
		req.Header.Set(name, value)
	}
	client := http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	return resp, string(body)
}

// Bearer is the Authorization header that carries token ("" none).
func Bearer(token string) []string {
	if token == "" {
		return nil
	}
	return []string{"Authorization: Bearer " + token}
}
