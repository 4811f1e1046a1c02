package main

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// franz-go only allows acks other than all with idempotence off, so the
// acks=0 and acks=1 producers turn it off; everything else stays default
// (franz-go's default codec is snappy).
func produceAcks0(ctx context.Context, o options) (string, error) {
	_, err := produceAndVerify(ctx, o, o.prefix+"acks0", 100,
		kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	return "", err
}

func produceAcks1(ctx context.Context, o options) (string, error) {
	_, err := produceAndVerify(ctx, o, o.prefix+"acks1", 100,
		kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	return "", err
}

func produceAcksAll(ctx context.Context, o options) (string, error) {
	_, err := produceAndVerify(ctx, o, o.prefix+"acksall", 100, kgo.RequiredAcks(kgo.AllISRAcks()))
	return "", err
}

var codecs = map[string]kgo.CompressionCodec{
	"gzip":   kgo.GzipCompression(),
	"snappy": kgo.SnappyCompression(),
	"lz4":    kgo.Lz4Compression(),
	"zstd":   kgo.ZstdCompression(),
}

func compression(codec string) scenario {
	return func(ctx context.Context, o options) (string, error) {
		_, err := produceAndVerify(ctx, o, o.prefix+"compression-"+codec, 100,
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(codecs[codec]))
		return "", err
	}
}

// Idempotence is franz-go's default (there is no option to turn it on beyond
// not disabling it); the producer id on the acked records proves it was used.
func idempotentProduce(ctx context.Context, o options) (string, error) {
	sent, err := produceAndVerify(ctx, o, o.prefix+"idempotent", 1000, kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return "", err
	}
	if pid := sent[0].ProducerID; pid < 0 {
		return "", fmt.Errorf("records were acked without a producer id (%d): idempotence was not in effect", pid)
	}
	return fmt.Sprintf("producer id %d", sent[0].ProducerID), nil
}
