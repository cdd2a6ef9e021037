// `pnpm run synth` / `cdktf synth`: reads the configuration ($STRATA_INFRA_CONFIG or defaults) and
// writes Terraform JSON to cdktf.out/stacks/<stack>/cdk.tf.json. Nothing here talks to AWS.
import { App } from 'cdktf';
import { InfraConfigError, loadInfraConfig } from './config/load.js';
import { StrataEksStack } from './stack.js';

try {
  const config = loadInfraConfig();
  const app = new App({ outdir: process.env.CDKTF_OUTDIR ?? 'cdktf.out' });
  new StrataEksStack(app, config.clusterName, config);
  app.synth();
  console.log(`synthesized stack "${config.clusterName}" into ${app.outdir}`);
} catch (err) {
  if (!(err instanceof InfraConfigError)) throw err;
  console.error(err.message);
  process.exitCode = 1;
}
