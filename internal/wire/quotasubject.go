package wire

// The bucket subjects allot.<node>.quota.take.<namespace>.<name> and
// .report.<namespace>.<name> name their bucket; a payload may leave it
// out, and one it names must be that bucket.

// DecodeQuotaTakeOn decodes and validates a take that arrived on the
// subject of bucket namespace:name, as DecodeQuotaTake does. A payload
// without a bucket asks for that one; a payload naming another is a 400:
// it was sent to the wrong subject, and its subject decides which
// partition answers.
func DecodeQuotaTakeOn(e Encoding, data []byte, namespace, name string, out *QuotaTake) error {
	r, err := decodeTakeRaw(e, data)
	if err != nil {
		return err
	}
	switch {
	case r.bucket == "":
		r.bucket = namespace + ":" + name
	case !isBucket(r.bucket, namespace, name):
		return badf("bucket %q in the payload is not %q of the subject", clip(r.bucket), namespace+":"+name)
	}
	return validateTake(&r, out)
}

// DecodeQuotaReportsOn decodes reports that arrived on the subject of
// bucket namespace:name, as DecodeQuotaReports does: a report without a
// bucket charges that one. It returns an error, and no reports, if a
// report names another bucket: the message was sent to the wrong
// subject, and applying it could charge a bucket another partition owns.
func DecodeQuotaReportsOn(e Encoding, data []byte, namespace, name string) (QuotaReports, error) {
	q := QuotaReports{subject: namespace + ":" + name}
	q.decode(e, data)
	for _, r := range q.Reports {
		if r.Bucket != q.subject {
			return QuotaReports{}, badf("bucket %q in the payload is not %q of the subject", clip(r.Bucket), q.subject)
		}
	}
	return q, nil
}

// isBucket reports whether bucket is namespace:name, without building it.
func isBucket(bucket, namespace, name string) bool {
	return len(bucket) == len(namespace)+1+len(name) && bucket[:len(namespace)] == namespace &&
		bucket[len(namespace)] == ':' && bucket[len(namespace)+1:] == name
}
