{{- /*
`aiops mcp --transport http` in the fleet's pod (values: mcp; docs/MCP.md, docs/KUBERNETES.md "Integrations").
A container of the fleet's pod, not a Deployment of its own: the workspace is on the fleet's ReadWriteOnce
volume, and the server borrows the file from the running fleet over <db>.service.sock, finding the fleet by
the PID in <db>.service.lock (hence shareProcessNamespace on the pod).
*/ -}}

{{- define "aiops.mcpTokenFile" -}}/run/secrets/aiops-mcp/token{{- end -}}

{{- /* The Host names clients may use: the Service's names, then mcp.allowedHosts. */ -}}
{{- define "aiops.mcpHosts" -}}
{{- $svc := printf "%s-mcp" .Release.Name }}
{{- $ns := printf "%s.%s" $svc .Release.Namespace }}
{{- concat (list $svc $ns (printf "%s.svc" $ns) (printf "%s.svc.cluster.local" $ns)) .Values.mcp.allowedHosts | toJson }}
{{- end -}}

{{- define "aiops.mcpContainer" -}}
{{- include "aiops.secretRef" (list .Values.mcp.token "mcp.token") }}
- name: mcp
  image: {{ include "aiops.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  # Waits for the fleet to make its workspace (the first install), then is `aiops mcp` itself.
  command:
    - sh
    - -c
    - 'until [ -e "$AIOPS_MCP_DB" ]; do sleep 1; done; exec aiops "$@"'
    - aiops-mcp
  args:
    - mcp
    - --config
    - /etc/aiops/config.toml
    - --transport
    - http
    - --listen
    - 0.0.0.0:{{ .Values.mcp.port }}
    - --token-file
    - {{ include "aiops.mcpTokenFile" . }}
    {{- range (include "aiops.mcpHosts" . | fromJsonArray) }}
    - --allowed-host
    - {{ . }}
    {{- end }}
    {{- if .Values.mcp.filesClaim }}
    - --files-root
    - /srv/aiops-files
    {{- end }}
  env:
    - name: AIOPS_MCP_DB  # the fleet's [store] path
      value: /var/lib/aiops/fleet.duckdb
  ports:
    - name: mcp
      containerPort: {{ .Values.mcp.port }}
      protocol: TCP
  # No probes: the pod's readiness is the fleet's (its Service, its scrape); a server that exits is restarted.
  resources:
    {{- toYaml .Values.mcp.resources | nindent 4 }}
  securityContext:
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
  volumeMounts:
    - name: config
      mountPath: /etc/aiops
      readOnly: true
    - name: mcp-token
      mountPath: /run/secrets/aiops-mcp
      readOnly: true
    - name: store  # read, and one short write per proposal, on loan from the fleet
      mountPath: /var/lib/aiops
    - name: mcp-tmp
      mountPath: /tmp
    {{- if .Values.mcp.filesClaim }}
    - name: mcp-files
      mountPath: /srv/aiops-files
      readOnly: true
    {{- end }}
{{- end -}}

{{- define "aiops.mcpVolumes" -}}
- name: mcp-token
  secret:
    secretName: {{ .Values.mcp.token.existingSecret }}
    items:
      - key: {{ .Values.mcp.token.key | quote }}
        path: token
    defaultMode: 0400
- name: mcp-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if .Values.mcp.filesClaim }}
- name: mcp-files
  persistentVolumeClaim:
    claimName: {{ .Values.mcp.filesClaim }}
    readOnly: true
{{- end }}
{{- end -}}
