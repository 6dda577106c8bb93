// Command kedaclient calls an external scaler the way KEDA's operator does, with KEDA's own generated client
// (github.com/kedacore/keda/v2/pkg/scalers/externalscaler, a published Go module), and prints what it got as
// JSON for tests/e2e_k8s/test_keda_client.py.
//
// It mirrors pkg/scalers/external_scaler.go of KEDA v2.20: one ScaledObjectRef {name, namespace,
// scalerMetadata = the trigger's metadata}; GetMetricSpec, whose metric names KEDA prefixes with "s<index>-"
// for the HPA; GetMetrics with the name *without* that prefix, reading metricValueFloat when it is > 0 and the
// deprecated int64 metricValue otherwise; IsActive; and StreamIsActive (type: external-push), of which it
// reads the first message (what KEDA receives when the stream opens), waiting at most -stream-timeout. The connection is built as KEDA
// builds it: grpc.NewClient with the round_robin service config, plaintext.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

const grpcConfig = `{"loadBalancingConfig": [{"round_robin":{}}]}` // KEDA's, verbatim

type metricSpec struct {
	MetricName      string  `json:"metricName"`
	HpaMetricName   string  `json:"hpaMetricName"`
	TargetSize      int64   `json:"targetSize"`
	TargetSizeFloat float64 `json:"targetSizeFloat"`
}

type metricValue struct {
	MetricName string  `json:"metricName"`
	Value      float64 `json:"value"`
}

type result struct {
	MetricSpecs []metricSpec  `json:"metricSpecs"`
	Metrics     []metricValue `json:"metrics"`
	IsActive    bool          `json:"isActive"`
	Stream      []bool        `json:"stream"`
	StreamQuiet bool          `json:"streamQuiet"` // no message within -stream-timeout (the stream stays open)
	Errors      []string      `json:"errors"`
}

func main() {
	address := flag.String("address", "", "scalerAddress (host:port)")
	name := flag.String("name", "", "ScaledObject name")
	namespace := flag.String("namespace", "", "ScaledObject namespace")
	metadata := flag.String("metadata", "", "trigger metadata as k=v,k=v (besides scalerAddress)")
	triggerIndex := flag.Int("trigger-index", 0, "the trigger's index in the ScaledObject")
	timeout := flag.Duration("timeout", 10*time.Second, "deadline of the whole run")
	streamTimeout := flag.Duration("stream-timeout", 3*time.Second, "how long to wait for StreamIsActive's first message")
	flag.Parse()

	meta := map[string]string{"scalerAddress": *address}
	for _, pair := range strings.Split(*metadata, ",") {
		if key, value, ok := strings.Cut(pair, "="); ok {
			meta[key] = value
		}
	}
	ref := &pb.ScaledObjectRef{Name: *name, Namespace: *namespace, ScalerMetadata: meta}

	conn, err := grpc.NewClient(*address, grpc.WithDefaultServiceConfig(grpcConfig),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpc.NewClient:", err)
		os.Exit(2)
	}
	defer conn.Close()
	client := pb.NewExternalScalerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	out := result{MetricSpecs: []metricSpec{}, Metrics: []metricValue{}, Stream: []bool{}, Errors: []string{}}
	fail := func(call string, err error) {
		out.Errors = append(out.Errors, fmt.Sprintf("%s: %s: %s", call, status.Code(err), status.Convert(err).Message()))
	}

	if specs, err := client.GetMetricSpec(ctx, ref); err != nil {
		fail("GetMetricSpec", err)
	} else {
		for _, spec := range specs.MetricSpecs {
			out.MetricSpecs = append(out.MetricSpecs, metricSpec{
				MetricName:      spec.MetricName,
				HpaMetricName:   fmt.Sprintf("s%d-%s", *triggerIndex, spec.MetricName),
				TargetSize:      spec.TargetSize,
				TargetSizeFloat: spec.TargetSizeFloat,
			})
		}
	}
	for _, spec := range out.MetricSpecs {
		// KEDA strips the "s<index>-" prefix before asking the scaler (RemoveIndexFromMetricName).
		unprefixed := strings.TrimPrefix(spec.HpaMetricName, fmt.Sprintf("s%d-", *triggerIndex))
		values, err := client.GetMetrics(ctx, &pb.GetMetricsRequest{MetricName: unprefixed, ScaledObjectRef: ref})
		if err != nil {
			fail("GetMetrics", err)
			continue
		}
		for _, v := range values.MetricValues {
			value := float64(v.MetricValue)
			if v.MetricValueFloat > 0 {
				value = v.MetricValueFloat
			}
			out.Metrics = append(out.Metrics, metricValue{MetricName: v.MetricName, Value: value})
		}
	}
	if active, err := client.IsActive(ctx, ref); err != nil {
		fail("IsActive", err)
	} else {
		out.IsActive = active.Result
	}
	streamCtx, stopStream := context.WithTimeout(ctx, *streamTimeout)
	defer stopStream()
	if stream, err := client.StreamIsActive(streamCtx, ref); err != nil {
		fail("StreamIsActive", err)
	} else if first, err := stream.Recv(); status.Code(err) == codes.DeadlineExceeded {
		out.StreamQuiet = true
	} else if err != nil {
		fail("StreamIsActive.Recv", err)
	} else {
		out.Stream = append(out.Stream, first.Result)
	}

	encoded, _ := json.Marshal(out)
	fmt.Println(string(encoded))
}
