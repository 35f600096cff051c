{{- /*
The fleet's integrations (values: notify (its webhooks and ticket sink), chatops.slack, console, fleet.approvers; docs/KUBERNETES.md,
"Integrations"). Every secret is an existing Secret's key, projected into one read-only volume at
/run/secrets/aiops-integrations (mode 0400); the TOML names those files. Strings go into TOML through toJson:
a JSON string is a TOML basic string.
*/ -}}

{{- define "aiops.integrationsDir" -}}/run/secrets/aiops-integrations{{- end -}}

{{- /* A {existingSecret, key} value, checked: both set; `what` names it in the message. */ -}}
{{- define "aiops.secretRef" -}}
{{- $ref := index . 0 }}{{ $what := index . 1 }}
{{- if not (and $ref $ref.existingSecret $ref.key) }}
{{- fail (printf "%s: give existingSecret and key (a Secret you made; docs/KUBERNETES.md, \"Integrations\")" $what) }}
{{- end }}
{{- end -}}

{{- /* Each secret file as "<file name> <Secret> <key>" lines, in a stable order. */ -}}
{{- define "aiops.integrationFiles" -}}
{{- range $n, $hook := .Values.notify.webhooks }}
{{- if $hook.routingKey }}
notify-{{ $n }}-routing-key {{ $hook.routingKey.existingSecret }} {{ $hook.routingKey.key }}
{{- end }}
{{- if $hook.urlSecret }}
notify-{{ $n }}-url {{ $hook.urlSecret.existingSecret }} {{ $hook.urlSecret.key }}
{{- end }}
{{- end }}
{{- if .Values.notify.ticket.url }}
notify-ticket-token {{ .Values.notify.ticket.token.existingSecret }} {{ .Values.notify.ticket.token.key }}
{{- end }}
{{- if .Values.chatops.slack.enabled }}
slack-signing-secret {{ .Values.chatops.slack.signingSecret.existingSecret }} {{ .Values.chatops.slack.signingSecret.key }}
slack-bot-token {{ .Values.chatops.slack.botToken.existingSecret }} {{ .Values.chatops.slack.botToken.key }}
{{- end }}
{{- if and .Values.console.oidc.issuer .Values.console.oidc.clientSecret.existingSecret }}
oidc-client-secret {{ .Values.console.oidc.clientSecret.existingSecret }} {{ .Values.console.oidc.clientSecret.key }}
{{- end }}
{{- end -}}

{{- /* The projected volume's sources (a YAML list), empty when no integration has a secret. */ -}}
{{- define "aiops.integrationSources" -}}
{{- range $line := splitList "\n" (include "aiops.integrationFiles" . | trim) }}
{{- if $line }}
{{- $f := splitList " " $line }}
- secret:
    name: {{ index $f 1 }}
    items:
      - key: {{ index $f 2 | quote }}
        path: {{ index $f 0 }}
{{- end }}
{{- end }}
{{- end -}}

{{- /* The TOML the integrations add to the fleet's config.toml (after its own sections). */ -}}
{{- define "aiops.integrationsToml" -}}
{{- $dir := include "aiops.integrationsDir" . }}
{{- $kinds := list "json" "slack" "alertmanager" "pagerduty" "teams" }}
{{- if or .Values.notify.consoleUrl .Values.notify.webhooks }}

[notify]
console_url = {{ .Values.notify.consoleUrl | toJson }}
{{- range $n, $hook := .Values.notify.webhooks }}
{{- $where := printf "notify.webhooks[%d]" $n }}
{{- if not (has $hook.kind $kinds) }}
{{- fail (printf "%s.kind: %v is not one of %s" $where $hook.kind (join ", " $kinds)) }}
{{- end }}

[[notify.webhooks]]
kind = {{ $hook.kind | toJson }}
{{- if eq $hook.kind "pagerduty" }}
{{- include "aiops.secretRef" (list $hook.routingKey (printf "%s.routingKey" $where)) }}
routing_key_file = "{{ $dir }}/notify-{{ $n }}-routing-key"
{{- else if $hook.routingKey }}
{{- fail (printf "%s.routingKey: only kind pagerduty has one" $where) }}
{{- end }}
{{- if and $hook.url $hook.urlSecret }}
{{- fail (printf "%s: give url or urlSecret, not both" $where) }}
{{- else if $hook.urlSecret }}
{{- include "aiops.secretRef" (list $hook.urlSecret (printf "%s.urlSecret" $where)) }}
url_file = "{{ $dir }}/notify-{{ $n }}-url"
{{- else if $hook.url }}
url = {{ $hook.url | toJson }}
{{- else if ne $hook.kind "pagerduty" }}
{{- fail (printf "%s: give url, or urlSecret (a Secret holding the URL)" $where) }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.notify.ticket }}
{{- if .url }}
{{- include "aiops.secretRef" (list .token "notify.ticket.token") }}
{{- if not (has .kind (list "jira" "servicenow")) }}
{{- fail (printf "notify.ticket.kind: %v is not one of jira, servicenow" .kind) }}
{{- end }}

[notify.ticket]
kind = {{ .kind | toJson }}
url = {{ .url | toJson }}
user = {{ .user | toJson }}
token_file = "{{ $dir }}/notify-ticket-token"
project = {{ .project | toJson }}
issue_type = {{ .issueType | toJson }}
assignment_group = {{ .assignmentGroup | toJson }}
{{- end }}
{{- end }}
{{- with .Values.chatops.slack }}
{{- if .enabled }}
{{- include "aiops.secretRef" (list .signingSecret "chatops.slack.signingSecret") }}
{{- include "aiops.secretRef" (list .botToken "chatops.slack.botToken") }}
{{- if not .channel }}
{{- fail "chatops.slack.channel: give the channel's id (e.g. C0123ABCD)" }}
{{- end }}

[chatops.slack]
signing_secret_file = "{{ $dir }}/slack-signing-secret"
bot_token_file = "{{ $dir }}/slack-bot-token"
channel = {{ .channel | toJson }}
approval_classes = {{ .approvalClasses | toJson }}

[chatops.slack.users]
{{- range $user, $principal := .users }}
{{ $user | toJson }} = {{ $principal | toJson }}
{{- end }}
{{- end }}
{{- end }}
{{- if or .Values.console.enabled .Values.console.oidc.issuer }}
{{- if not .Values.console.enabled }}
{{- fail "console.oidc.issuer is set: console.enabled must be true too (single sign-on is the console's)" }}
{{- end }}

[console]
enabled = true
secure_cookies = {{ .Values.console.secureCookies }}
{{- with include "aiops.consoleUrl" . }}
url = {{ . | toJson }}  # notify.consoleUrl, else the ingress's: notifications link to its incident pages
{{- end }}
{{- with .Values.console.oidc }}
{{- if .issuer }}

[console.oidc]
issuer = {{ .issuer | toJson }}
name = {{ .name | toJson }}
client_id = {{ .clientId | toJson }}
{{- if .clientSecret.existingSecret }}
{{- include "aiops.secretRef" (list .clientSecret "console.oidc.clientSecret") }}
client_secret_file = "{{ $dir }}/oidc-client-secret"
{{- end }}
redirect_base_url = {{ .redirectBaseUrl | toJson }}
principal_claim = {{ .principalClaim | toJson }}
principal_prefix = {{ .principalPrefix | toJson }}
role_claim = {{ .roleClaim | toJson }}

[console.oidc.role_map]
{{- range $value, $role := .roleMap }}
{{ $value | toJson }} = {{ $role | toJson }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.fleet.approvers }}

[guardrails.approvers]
{{- range $principal, $classes := . }}
{{ $principal | toJson }} = {{ $classes | toJson }}
{{- end }}
{{- end }}
{{- end -}}
