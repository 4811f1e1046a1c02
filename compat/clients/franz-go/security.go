package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// login is one entry of the --security file (compat/README.md): where a
// security row connects and how it logs in.
type login struct {
	Bootstrap      string `json:"bootstrap"`
	Protocol       string `json:"security_protocol"`
	CA             string `json:"ca"`
	ClientCert     string `json:"client_cert"`
	ClientKey      string `json:"client_key"`
	Mechanism      string `json:"sasl_mechanism"`
	Username       string `json:"username"`
	Password       string `json:"password"`
	Token          string `json:"token"`
	TokenPrincipal string `json:"token_principal"`
	// fetch_from_follower's entry: each node's rack and /metrics URL, by node id.
	Racks   map[string]string `json:"racks"`
	Metrics map[string]string `json:"metrics"`
}

type securityFile struct {
	Scenarios map[string]login `json:"scenarios"`
	Error     string           `json:"error"`
}

const secureRecords = 50

func readSecurity(path string) (securityFile, error) {
	if path == "" {
		return securityFile{Error: "no --security file given"}, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return securityFile{}, err
	}
	var f securityFile
	return f, json.Unmarshal(raw, &f)
}

func (o options) login(scenario string) (login, error) {
	l, ok := o.security.Scenarios[scenario]
	if !ok {
		return l, fmt.Errorf("the --security file has no login for %s %s", scenario, o.security.Error)
	}
	return l, nil
}

// secured is o pointed at the login's listener, and the kgo options that log in
// there: kgo.DialTLSConfig for TLS (with the client certificate for mutual TLS)
// and kgo.SASL with franz-go's scram, plain or oauth mechanism.
func secured(o options, l login) (options, []kgo.Opt, error) {
	var opts []kgo.Opt
	if strings.HasSuffix(l.Protocol, "SSL") {
		pem, err := os.ReadFile(l.CA)
		if err != nil {
			return o, nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return o, nil, fmt.Errorf("no certificate in %s", l.CA)
		}
		cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if l.ClientCert != "" {
			cert, err := tls.LoadX509KeyPair(l.ClientCert, l.ClientKey)
			if err != nil {
				return o, nil, err
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if strings.HasPrefix(l.Protocol, "SASL_") {
		var m sasl.Mechanism
		switch l.Mechanism {
		case "SCRAM-SHA-512":
			m = scram.Auth{User: l.Username, Pass: l.Password}.AsSha512Mechanism()
		case "SCRAM-SHA-256":
			m = scram.Auth{User: l.Username, Pass: l.Password}.AsSha256Mechanism()
		case "PLAIN":
			m = plain.Auth{User: l.Username, Pass: l.Password}.AsMechanism()
		case "OAUTHBEARER":
			m = oauth.Auth{Token: l.Token}.AsMechanism()
		default:
			return o, nil, fmt.Errorf("unknown SASL mechanism %q", l.Mechanism)
		}
		opts = append(opts, kgo.SASL(m))
	}
	so := o
	so.bootstrap = strings.Split(l.Bootstrap, ",")
	return so, opts, nil
}

// secureRoundTrip: create a topic (kadm), produce 50 values with acks=all,
// read them all in a group, commit, and read the committed offset back, every
// client logged in as the scenario's --security entry says.
func secureRoundTrip(id string) scenario {
	return func(ctx context.Context, o options) (string, error) {
		l, err := o.login(id)
		if err != nil {
			return "", err
		}
		so, opts, err := secured(o, l)
		if err != nil {
			return "", err
		}
		topic := o.prefix + strings.ReplaceAll(id, "_", "-")
		cl, err := newClient(so, opts...)
		if err != nil {
			return "", err
		}
		adm := kadm.NewClient(cl)
		defer adm.Close()
		if err := createTopic(ctx, adm, o, topic, 1); err != nil {
			return "", err
		}
		recs := make([]*kgo.Record, secureRecords)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf("%s-%d", topic, i))}
		}
		if err := produceTo(ctx, so, recs, append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))...); err != nil {
			return "", err
		}
		group := o.prefix + id + "-group"
		c, err := groupConsumer(so, group, topic, append(opts, kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
		if err != nil {
			return "", err
		}
		defer c.Close()
		got, err := consume(ctx, c, secureRecords)
		if err != nil {
			return "", err
		}
		if len(got) != secureRecords {
			return "", fmt.Errorf("read back %d records, sent %d", len(got), secureRecords)
		}
		for i, r := range got {
			if string(r.Value) != string(recs[i].Value) {
				return "", fmt.Errorf("record %d read back as %q, sent %q", i, r.Value, recs[i].Value)
			}
		}
		if err := c.CommitRecords(ctx, got[len(got)-1]); err != nil {
			return "", fmt.Errorf("commit: %w", err)
		}
		offsets, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return "", fmt.Errorf("fetch the committed offsets: %w", err)
		}
		if at, ok := offsets.Lookup(topic, 0); !ok || at.At != secureRecords {
			return "", fmt.Errorf("committed offset %+v, want %d", at, secureRecords)
		}
		return "", nil
	}
}

// saslWrongPassword: a SCRAM-SHA-512 login with a wrong password must fail
// with SASL_AUTHENTICATION_FAILED, which franz-go returns from the first request.
func saslWrongPassword(ctx context.Context, o options) (string, error) {
	l, err := o.login("sasl_wrong_password")
	if err != nil {
		return "", err
	}
	so, opts, err := secured(o, l)
	if err != nil {
		return "", err
	}
	// A retriable error would be retried until the deadline; one attempt shows what is reported.
	cl, err := newClient(so, append(opts, kgo.RequestRetries(0), kgo.RetryTimeout(5*time.Second))...)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	_, err = adm.ListBrokers(ctx)
	switch {
	case err == nil:
		return "", errors.New("listing brokers succeeded with a wrong password")
	case !errors.Is(err, kerr.SaslAuthenticationFailed):
		var netErr net.Error
		if errors.As(err, &netErr) {
			return "", fmt.Errorf("expected SASL_AUTHENTICATION_FAILED, got a network error: %w", err)
		}
		return "", fmt.Errorf("expected SASL_AUTHENTICATION_FAILED, got: %w", err)
	case !strings.Contains(err.Error(), "Authentication failed"):
		return "", fmt.Errorf("SASL_AUTHENTICATION_FAILED without the broker's message: %w", err)
	}
	return err.Error(), nil
}
