package quota

// Shadowed returns d as a bucket in shadow mode answers it: OK at once,
// whatever the bucket decided, with Shadow set and ShadowStatus the
// decision it stands for (its Reason kept for REJECTED). The bucket has
// already counted the decision as it stands, so its state is what it
// would be with the limit in force: an OK_WAIT's tokens are reserved, a
// REJECTED request took nothing. A bad request (ReasonBadRequest) is
// still refused: shadow mode watches limits, it does not accept input
// that means nothing.
func (d Decision) Shadowed() Decision {
	if d.Status == Rejected && d.Reason == ReasonBadRequest {
		return d
	}
	d.Shadow, d.ShadowStatus = true, d.Status
	d.Status, d.Wait, d.RetryAfter = OK, 0, 0
	return d
}

// WouldRefuse reports whether a shadow answer stands for a decision that
// did not let the request proceed at once (REJECTED or OK_WAIT).
func (d Decision) WouldRefuse() bool {
	return d.Shadow && d.ShadowStatus != OK
}
