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

{{- define "aiops.tokenSecret" -}}
{{- default (printf "%s-http-token" .Release.Name) .Values.http.existingSecret -}}
{{- end -}}

{{- define "aiops.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{- /* node.hosts, checked: not empty, each name node<N> and used once. */ -}}
{{- define "aiops.hosts" -}}
{{- if not .Values.node.hosts }}
{{- fail "node.hosts is empty: give each GPU node's hostname its name and rack, e.g. --set node.hosts.gpu-node-0.name=node0 --set node.hosts.gpu-node-0.rack=rack0 (docs/KUBERNETES.md)" }}
{{- end }}
{{- $seen := dict }}
{{- range $host, $node := .Values.node.hosts }}
{{- if not (regexMatch "^node[0-9]+$" (toString $node.name)) }}
{{- fail (printf "node.hosts.%s.name: %v is not node<N> (e.g. node0)" $host $node.name) }}
{{- end }}
{{- if not (regexMatch "^rack[0-9]+$" (toString $node.rack)) }}
{{- fail (printf "node.hosts.%s.rack: %v is not rack<N> (e.g. rack0)" $host $node.rack) }}
{{- end }}
{{- if hasKey $seen $node.name }}
{{- fail (printf "node.hosts: %s is the name of both %s and %s" $node.name (get $seen $node.name) $host) }}
{{- end }}
{{- $_ := set $seen $node.name $host }}
{{- end }}
{{- end -}}
