// Package sources makes the configuration sources the servers take
// (coordinator.TemplateSource, quotaserver.Config, domainserver.Config)
// out of allot's compiled configuration: a fixed set, a function, or the
// configuration watcher. A program outside the module builds its sources
// from documents (coordinator.ParseTemplates, quotaserver.ParseNamespaces,
// domainserver.ParseDomains); allot's own commands and tests, which hold
// compiled configuration or a watcher, build them here. Each interface's
// method is unexported, so that only this package implements it and the
// compiled configuration stays out of the servers' public API; a server
// reads its source with CurrentTemplates, CurrentQuota or CurrentDomains.
package sources

import (
	"sync/atomic"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/quota"
)

// Templates supply a coordinator's resource templates.
type Templates interface {
	// templates returns the templates in force; never nil.
	templates() *config.Set
}

// CurrentTemplates returns the templates in force.
func CurrentTemplates(t Templates) *config.Set { return t.templates() }

type templatesFunc func() *config.Set

func (f templatesFunc) templates() *config.Set { return f() }

// StaticTemplates returns Templates that are always set.
func StaticTemplates(set *config.Set) Templates {
	return templatesFunc(func() *config.Set { return set })
}

// TemplatesFunc returns Templates that are what current returns (never
// nil), called at each round: for tests that change templates under a
// running coordinator.
func TemplatesFunc(current func() *config.Set) Templates { return templatesFunc(current) }

// WatchedTemplates returns the templates of the configuration watcher w,
// which follows the configuration bucket, so that a put takes effect
// without a restart. They have a Status method: w's status (the verdict
// on every key), which the coordinator publishes in STATS.
func WatchedTemplates(w *configkv.Watcher) Templates { return watchedTemplates{w} }

type watchedTemplates struct{ w *configkv.Watcher }

func (w watchedTemplates) templates() *config.Set { return w.w.Current() }

// Status returns the watcher's status.
func (w watchedTemplates) Status() any { return w.w.Status() }

// Quota supplies a quota server's namespaces.
type Quota interface {
	// quota returns the namespaces in force; nil means none.
	quota() *quota.Config
}

// CurrentQuota returns the quota namespaces in force; nil means none.
func CurrentQuota(q Quota) *quota.Config { return q.quota() }

type quotaFunc func() *quota.Config

func (f quotaFunc) quota() *quota.Config { return f() }

// QuotaFunc returns a Quota whose namespaces are what current returns.
// current is called on every request, so it must be cheap (an atomic
// load), and return the same pointer until the configuration changes.
func QuotaFunc(current func() *quota.Config) Quota { return quotaFunc(current) }

// WatchedQuota returns the quota namespaces of the configuration watcher
// w's current Set, as the same pointer for as long as the Set is the
// same, so that a server sees a change only when there is one.
func WatchedQuota(w *configkv.Watcher) Quota {
	type seen struct {
		set *config.Set
		cfg *quota.Config
	}
	var last atomic.Pointer[seen]
	return quotaFunc(func() *quota.Config {
		set := w.Current()
		if p := last.Load(); p != nil && p.set == set {
			return p.cfg
		}
		p := &seen{set, set.Quota()}
		last.Store(p)
		return p.cfg
	})
}

// Domains supply a domain-limit server's namespaces.
type Domains interface {
	// domains returns the namespaces in force, by name.
	domains() map[string]*domainlimit.Namespace
}

// CurrentDomains returns the domain-limit namespaces in force, by name.
func CurrentDomains(d Domains) map[string]*domainlimit.Namespace { return d.domains() }

type domainsFunc func() map[string]*domainlimit.Namespace

func (f domainsFunc) domains() map[string]*domainlimit.Namespace { return f() }

// DomainsFunc returns Domains whose namespaces are what current returns.
// current is called on every request, so it must be cheap; a namespace
// whose pointer changed is re-read (hot reload).
func DomainsFunc(current func() map[string]*domainlimit.Namespace) Domains {
	return domainsFunc(current)
}

// WatchedDomains returns the domains.<namespace> keys of the
// configuration watcher w's current Set.
func WatchedDomains(w *configkv.Watcher) Domains {
	return domainsFunc(func() map[string]*domainlimit.Namespace { return w.Current().Domains() })
}
