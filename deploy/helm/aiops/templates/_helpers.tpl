{{- define "aiops.labels" -}}
app.kubernetes.io/name: aiops
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "aiops.selector" -}}
app.kubernetes.io/name: aiops
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* The Secret holding the /api token (key `token`), made by the operator in both namespaces. */ -}}
{{- define "aiops.tokenSecret" -}}
{{- default (printf "%s-http-token" .Release.Name) .Values.http.existingSecret -}}
{{- end -}}

{{- /* <repository>:<tag>, with @<digest> when one is given (the digest is what the runtime pulls). */ -}}
{{- define "aiops.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}{{ with .Values.image.digest }}@{{ . }}{{ end }}
{{- end -}}

{{- define "aiops.pullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- end -}}

{{- /* The node agents' namespace: node.namespace, else <release namespace>-node. */ -}}
{{- define "aiops.nodeNamespace" -}}
{{- default (printf "%s-node" .Release.Namespace) .Values.node.namespace -}}
{{- end -}}

{{- /* Cluster-scoped names (ClusterRole, ClusterRoleBinding): unique per release and namespace. */ -}}
{{- define "aiops.clusterName" -}}
{{- printf "%s:%s:node" .Release.Namespace .Release.Name -}}
{{- end -}}

{{- /* The console as people reach it: notify.consoleUrl, else the ingress's host. */ -}}
{{- define "aiops.consoleUrl" -}}
{{- if .Values.notify.consoleUrl }}
{{- .Values.notify.consoleUrl | trimSuffix "/" }}
{{- else if and .Values.ingress.enabled .Values.ingress.host }}
{{- printf "%s://%s" (ternary "https" "http" (not (empty .Values.ingress.tls.secretName))) .Values.ingress.host }}
{{- end }}
{{- end -}}

{{- /*
A host's component name by the product's rule (aiops/config.py `this_host_name`): lowercased, its first label
unless node.fqdn. tests/kubernetes/test_k8s_chart.py checks it against the product's own function.
*/ -}}
{{- define "aiops.hostName" -}}
{{- $name := lower (index . 0) }}
{{- if index . 1 }}{{ $name }}{{ else }}{{ first (splitList "." $name) }}{{ end }}
{{- end -}}

{{- /* The fleet's dispatch URL template: fleet.nodeUrl, else http://{host}:<http.port>. */ -}}
{{- define "aiops.nodeUrl" -}}
{{- default (printf "http://{host}:%v" .Values.http.port) .Values.fleet.nodeUrl -}}
{{- end -}}

{{- /*
What the alerts tell on-call to open or run (prometheusrule.yaml annotations), as JSON strings: the console's
incident page where its URL is known, and commands that exist (tests/kubernetes/test_k8s_chart_hosts.py parses each with
the real `aiops` parser). `{{ $labels.* }}` is left for Prometheus to fill.
*/ -}}
{{- /* (list . tier): where an incident's pending actions are listed: the fleet's workspace, or for a node
agent's own incident (tier node) the workspace of the agent on that node. */ -}}
{{- define "aiops.pendingActions" -}}
{{- $ := index . 0 }}{{ $tier := index . 1 }}
{{- $list := "aiops actions list --config /etc/aiops/config.toml --status pending" }}
{{- if and $.Values.fleet.enabled (eq $tier "fleet") }}
{{- printf "kubectl -n %s exec deploy/%s-fleet -c fleet -- %s" $.Release.Namespace $.Release.Name $list }}
{{- else }}
{{- $ns := include "aiops.nodeNamespace" $ }}
{{- $pods := printf "kubectl -n %s get pods -o wide -l app.kubernetes.io/instance=%s,app.kubernetes.io/component=node" $ns $.Release.Name }}
{{- printf "kubectl -n %s exec POD -- %s (POD: the agent's pod on that node, %s)" $ns $list $pods }}
{{- end }}
{{- end -}}

{{- define "aiops.incidentDescription" -}}
{{- $ := index . 0 }}
{{- $text := `{{ $labels.job }} on {{ $labels.instance }} opened {{ $labels.incident_id }} ({{ $labels.severity }}); its top hypothesis is {{ $labels.root_cause }} on {{ $labels.component }}.` }}
{{- with include "aiops.consoleUrl" $ }}
{{- $text = printf "%s Evidence, plan and proposed actions: %s/incidents/{{ $labels.incident_id }}." $text . }}
{{- end }}
{{- printf "%s Pending actions: %s." $text (include "aiops.pendingActions" .) | toJson }}
{{- end -}}

{{- define "aiops.collectorErrorsDescription" -}}
{{- $query := `sum by (collector, error) (increase(aiops_collector_error_rows_total{instance="{{ $labels.instance }}"}[1h]))` }}
{{- printf "Which error (an exception class, or unavailable) in Prometheus: %s. Each error's text is on that agent's console page /collectors ([console] enabled in node.extraConfig)." $query | toJson }}
{{- end -}}
