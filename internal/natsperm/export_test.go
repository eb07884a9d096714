package natsperm

// For the tests: the streams and buckets streams.Ensure creates.
var (
	AllStreams = allStreams
	AllBuckets = allBuckets
)
