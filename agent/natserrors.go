package agent

import (
	"errors"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"
)

// ErrorHandler returns a nats.ErrHandler for the connection a service
// gives its Agent: asynchronous errors are logged to log (slog.Default if
// nil), and a permission violation as an error naming the subject it was
// refused on. NATS tells a client of a refused publish or subscription
// only this way; without it a missing permission looks like a time-out.
//
//	nc, err := nats.Connect(url, nats.UserCredentials(creds), nats.ErrorHandler(agent.ErrorHandler(nil)))
func ErrorHandler(log *slog.Logger) nats.ErrHandler {
	if log == nil {
		log = slog.Default()
	}
	return func(nc *nats.Conn, sub *nats.Subscription, err error) {
		subject := ""
		if sub != nil {
			subject = sub.Subject
		}
		if errors.Is(err, nats.ErrPermissionViolation) {
			// The error's text names the refused subject as the server
			// sent it; the subscription's subject is ours.
			if inboxRefused(nc, err) {
				// Every request's reply is lost: say what to do.
				log.Error("allot: NATS refused this connection's subscription to its replies: connect with nats.CustomInboxPrefix(PREFIX), a prefix this user may subscribe to (a tenant of docs/security.md: _INBOX_<user>)", "err", err)
				return
			}
			log.Error("allot: NATS refused a permission (check this user's publish/subscribe permissions)", "err", err, "subscription", subject)
			return
		}
		log.Warn("allot: NATS asynchronous error", "err", err, "subscription", subject)
	}
}

// inboxRefused reports whether err refuses nc's subscription to its own
// replies (under its inbox prefix).
func inboxRefused(nc *nats.Conn, err error) bool {
	prefix := nats.InboxPrefix
	if nc != nil && nc.Opts.InboxPrefix != "" {
		prefix = nc.Opts.InboxPrefix + "."
	}
	return strings.Contains(err.Error(), `Subscription to "`+prefix)
}
