// Command franz-go is the compatibility-matrix adapter for franz-go (kgo + kadm).
//
// It runs the requested scenarios against a running cluster and prints one JSON
// line per scenario on stdout (the contract of issue 11 §3, driven by compat/run.py);
// everything else goes to stderr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

type options struct {
	bootstrap []string
	brokers   int
	prefix    string
	security  securityFile // the secured listeners' logins (--security)
}

type outcome struct {
	Scenario string `json:"scenario"`
	Result   string `json:"result"`
	Detail   string `json:"detail"`
}

// errNA marks a scenario this client cannot express; its text is the reason.
type errNA struct{ reason string }

func (e errNA) Error() string { return e.reason }

// A scenario returns nil (pass), a note-carrying pass, errNA, or a failure.
type scenario func(ctx context.Context, o options) (note string, err error)

// Most scenarios finish in a few seconds; the deadline only stops a hang from
// eating the driver's whole per-client timeout.
const defaultDeadline = 40 * time.Second

var deadlines = map[string]time.Duration{
	"many_topics":        70 * time.Second,
	"idempotent_produce": 60 * time.Second,
}

func main() {
	bootstrap := flag.String("bootstrap", "", "comma-separated host:port list")
	brokers := flag.Int("brokers", 1, "cluster size")
	prefix := flag.String("prefix", "", "prefix for every topic and group created")
	security := flag.String("security", "", "the secured listeners' logins (JSON, see compat/README.md)")
	scenarios := flag.String("scenarios", "", "comma-separated scenario ids")
	flag.Parse()
	if *bootstrap == "" || *prefix == "" || *scenarios == "" {
		fmt.Fprintln(os.Stderr, "usage: franz-go --bootstrap HOST:PORT[,...] --brokers N --prefix P --security FILE --scenarios s1,s2,...")
		os.Exit(2)
	}
	sec, err := readSecurity(*security)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot read --security:", err)
		sec = securityFile{Error: err.Error()}
	}
	o := options{bootstrap: strings.Split(*bootstrap, ","), brokers: *brokers, prefix: *prefix, security: sec}
	enc := json.NewEncoder(os.Stdout)
	var mu sync.Mutex
	report := func(id string) {
		r := run(id, o)
		mu.Lock()
		defer mu.Unlock()
		if err := enc.Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, "cannot write result:", err)
			os.Exit(1)
		}
	}
	var sideBySide []string
	for _, id := range strings.Split(*scenarios, ",") {
		if securityRows[id] {
			sideBySide = append(sideBySide, id)
			continue
		}
		report(id)
	}
	var wg sync.WaitGroup
	for _, id := range sideBySide {
		wg.Add(1)
		go func() {
			defer wg.Done()
			report(id)
		}()
	}
	wg.Wait()
}

// securityRows run side by side, after the others: each has its own topic,
// group and login, and spends most of its time in its group's first join (the
// broker's group.initial.rebalance.delay.ms), so in turn they would only add up waits.
var securityRows = map[string]bool{
	"sasl_ssl_scram512": true, "sasl_ssl_plain": true, "sasl_plaintext_scram256": true,
	"ssl_mtls": true, "oauthbearer": true, "sasl_wrong_password": true,
}

// run executes one scenario under its deadline. The scenario runs in its own
// goroutine so that a client call ignoring its context cannot block the rest.
func run(id string, o options) outcome {
	if strings.HasPrefix(id, "tool_") {
		return outcome{id, "n/a", "not a client-library feature"}
	}
	fn, ok := allScenarios[id]
	if !ok {
		return outcome{id, "fail", "this adapter does not know scenario " + id}
	}
	limit := defaultDeadline
	if d, ok := deadlines[id]; ok {
		limit = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	type res struct {
		note string
		err  error
	}
	done := make(chan res, 1)
	start := time.Now()
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- res{err: fmt.Errorf("panic: %v", p)}
			}
		}()
		note, err := fn(ctx, o)
		done <- res{note, err}
	}()
	var r res
	select {
	case r = <-done:
	case <-time.After(limit + 5*time.Second):
		r = res{err: fmt.Errorf("scenario did not return within %v", limit+5*time.Second)}
	}
	fmt.Fprintf(os.Stderr, "[franz-go] %s finished in %v: err=%v\n", id, time.Since(start).Round(time.Millisecond), r.err)
	var na errNA
	switch {
	case r.err == nil:
		return outcome{id, "pass", r.note}
	case errors.As(r.err, &na):
		return outcome{id, "n/a", na.reason}
	default:
		return outcome{id, "fail", r.err.Error()}
	}
}

var allScenarios = map[string]scenario{
	"metadata":            metadata,
	"admin_topics":        adminTopics,
	"produce_acks0":       produceAcks0,
	"produce_acks1":       produceAcks1,
	"produce_acksall":     produceAcksAll,
	"compression_gzip":    compression("gzip"),
	"compression_snappy":  compression("snappy"),
	"compression_lz4":     compression("lz4"),
	"compression_zstd":    compression("zstd"),
	"idempotent_produce":  idempotentProduce,
	"group_resume":        groupResume,
	"two_groups":          twoGroups,
	"groups_describe_lag": groupsDescribeLag,
	"offsets_for_times":   offsetsForTimes,
	"delete_records":      deleteRecords,
	"empty_topic":         emptyTopic,
	"many_topics":         manyTopics,
	"regex_subscribe":     regexSubscribe,
	// The transaction rows (tx.go).
	"transactions_commit_abort": transactionsCommitAbort,
	"read_committed":            readCommitted,
	"consume_transform_produce": consumeTransformProduce,
	// The security rows (security.go).
	"sasl_ssl_scram512":       secureRoundTrip("sasl_ssl_scram512"),
	"sasl_ssl_plain":          secureRoundTrip("sasl_ssl_plain"),
	"sasl_plaintext_scram256": secureRoundTrip("sasl_plaintext_scram256"),
	"ssl_mtls":                secureRoundTrip("ssl_mtls"),
	"oauthbearer":             secureRoundTrip("oauthbearer"),
	"sasl_wrong_password":     saslWrongPassword,
	// The group protocol and follower rows (rows.go).
	"group_kip848":        groupKIP848,
	"group_migration":     groupMigration,
	"share_group":         shareGroup,
	"fetch_from_follower": fetchFromFollower,
}
