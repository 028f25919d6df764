// A KIP-848 consumer that subscribes by a server-side pattern (SubscriptionPattern, RE2J): the broker resolves it,
// and the group's description lists the pattern, not the topics. Run from source: java -cp "<kafka libs>/*"
// RegexConsumer.java <bootstrap> <group> <pattern>. It reads and commits (auto-commit) until it is stopped.
import java.time.Duration;
import java.util.Properties;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class RegexConsumer {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("group.protocol", "consumer");
        props.put("auto.offset.reset", "earliest");
        props.put("auto.commit.interval.ms", "200");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(new SubscriptionPattern(args[2]));
            while (true) {
                consumer.poll(Duration.ofMillis(200));
            }
        }
    }
}
