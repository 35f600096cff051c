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
unless node.fqdn. tests/test_k8s_chart.py checks it against the product's own function.
*/ -}}
{{- define "aiops.hostName" -}}
{{- $name := lower (index . 0) }}
{{- if index . 1 }}{{ $name }}{{ else }}{{ first (splitList "." $name) }}{{ end }}
{{- end -}}

{{- /* The fleet's dispatch URL template: fleet.nodeUrl, else http://{host}:<http.port>. */ -}}
{{- define "aiops.nodeUrl" -}}
{{- default (printf "http://{host}:%v" .Values.http.port) .Values.fleet.nodeUrl -}}
{{- end -}}
