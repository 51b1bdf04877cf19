// Swagger UI for this service's contract, same origin, no external validator (validatorUrl: "none").
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
  deepLinking: true,
  validatorUrl: "none",
  displayRequestDuration: true,
  defaultModelsExpandDepth: 0,
});
